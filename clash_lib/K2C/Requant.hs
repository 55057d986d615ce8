{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A quantizer whose every element has its own format (an HGQ2 quantizer with
per-element or per-channel bit-widths): each element of a beat rounded once at
its own fraction position and saturated to, or wrapped at, its own range, the
result held in one container format that holds every element's values
(keras2clash.kinds.quantize computes the constants and the golden model).

= Arithmetic

The input @SFixed ia fa@ is the exact value (its producer does not round it).
In @Signed n@, with the value scaled to @g@ fraction bits (@x = raw << up@,
@g = fa + up@), element @e@ has the constants 'Element' (all multiples of
@2^d@ where @d = g - f_e@):

1. round: @y = (x + bias + (x .&. lsb /= 0 ? 1 : 0)) .&. keep@ with
   @keep = -2^d@ (floor to a multiple of @2^d@), @bias = 2^(d-1)@ for ties
   toward +infinity, @2^(d-1) - 1@ with @lsb = 2^d@ for ties to even, 0 to
   truncate;
2. overflow: 'Saturate' clamps @y@ to @[lo, hi]@; 'Wrap' keeps it modulo
   @span + 1@ above @lo@ (@((y - lo) .&. span) + lo@), a power of two;
3. the container: @y >> down@ as @SFixed ib fb@ (exact: @y@ is a multiple of
   @2^d@, and @d >= down@).

An element of no bits (HGQ2 outputs 0 there) has every constant 0.

= Hardware, timing, protocol

A counter of the beats that moved in says which position of the image a beat
is (the constants are @Vec p@ positions of @Vec c@ elements); the beat and its
constants are registered, then the rounded and fitted values: 'RequantDepth'
register stages on "K2C.Pipe", one beat a cycle.
-}
module K2C.Requant
  ( requant
  , Element
  , RequantDepth
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Pipe (pipeS, stageReg)
import K2C.Quant (Overflow (..))
import K2C.Stream (Stream)
import K2C.Window (nextIndex)

-- | Register stages of 'requant': the beat with its constants, then the values.
type RequantDepth = 2

-- | One element's constants: (bias, lsb, keep, lo, hi or span).
type Element n = (Signed n, Signed n, Signed n, Signed n, Signed n)

-- | See the module header.
requant
  :: forall dom p c n ia fa ib fb
   . ( HiddenClockResetEnable dom, KnownNat p, KnownNat c, KnownNat n, 1 <= p
     , KnownNat ia, KnownNat fa, KnownNat ib, KnownNat fb )
  => Overflow -> Int -> Int -> Vec p (Vec c (Element n))
  -> Stream dom (Vec c (SFixed ia fa)) (Vec c (SFixed ib fb))
requant overflow up down constants = pipeS (SNat @RequantDepth) stages
  where
    stages input = stageReg (fmap (uncurry (zipWith element)) <$> tagged)
      where
        position = register (0 :: Index p) (mux (isJust <$> input) (nextIndex <$> position) position)
        tagged   = stageReg (fmap . (,) . (constants !!) <$> position <*> input)
    element (bias, lsb, keep, lo, top) v = sf (SNat @fb) (resize (shiftR fitted down))
      where
        x = shiftL (resize (unSF v) :: Signed n) up
        y = (x + bias + (if x .&. lsb /= 0 then 1 else 0)) .&. keep
        fitted = case overflow of
          Saturate -> max lo (min top y)
          Wrap -> ((y - lo) .&. top) + lo
