{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Stream scatter, the inverse of "K2C.Collect": one beat of @Vec (n * c) a@
becomes @n@ beats of @Vec c a@, elements @0 .. c-1@ first. After a dense layer
this is Keras' @Reshape@ of a vector into an image or a sequence (row-major,
channels last); after a "K2C.Collect" of @m@ beats it regroups beats of one
width into beats of another (a beat-width converter, same row-major order).
No arithmetic: the values are moved.

= Why it looks like this

One shift register of @n@ beats is both the input register and the output
register: the vector is loaded whole, the output is its first @c@ values, and
each beat that moves shifts the next one to the front. Storage:
@n * c * BitSize a@ bits of data, an @Index n@ counter and a flag.

= Protocol and exact timing

Input ready is @not full@ (registered; independent of the input's valid and of
downstream's ready).

* A vector accepted in cycle @t@ gives its first beat valid in cycle @t + 1@;
  beat @k + 1@ is valid the cycle after beat @k@ moved.
* Input ready is low while beats are held, and high again the cycle after the
  last beat moves: with downstream always ready, a vector accepted in cycle @t@
  delivers its beats in cycles @t + 1 .. t + n@ and the next vector can be
  accepted in cycle @t + n + 1@ (one vector per @n + 1@ cycles).
-}
module K2C.Scatter
  ( scatter
  , heldFor
  ) where

import Clash.Prelude hiding (scatter)
import Data.Maybe (isJust)

import K2C.Stream (Stream)
import K2C.Window (nextIndex)

-- | Split each vector beat into @n@ beats of @c@ values (see the module header).
scatter
  :: forall dom n c a
   . (HiddenClockResetEnable dom, KnownNat n, KnownNat c, 1 <= n, NFDataX a)
  => SNat n -> Stream dom (Vec (n * c) a) (Vec c a)
scatter n (input, readyOut) = (output, readyIn)
  where
    (full, accepted, delivered) = heldFor n (isJust <$> input) readyOut
    readyIn   = not <$> full
    -- No reset: 'full' alone says whether the buffer holds beats.
    buffer :: Signal dom (Vec n (Vec c a))
    buffer    = register (deepErrorX "scatter: no vector yet")
                  (mux accepted (unconcatI . fromJustX <$> input)
                     (mux delivered (shift <$> buffer) buffer))
    shift b   = b <<+ deepErrorX "scatter: past the last beat"
    output    = mux full (Just . (!! (0 :: Int)) <$> buffer) (pure Nothing)

-- | The control of a block that takes a beat when empty and delivers @n@ beats from it
-- (the rules in the module header): @(full, accepted, delivered)@; input ready is
-- @not full@.
heldFor
  :: forall dom n
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n)
  => SNat n -> Signal dom Bool -> Signal dom Bool -> (Signal dom Bool, Signal dom Bool, Signal dom Bool)
heldFor SNat inputValid readyOut = (full, accepted, delivered)
  where
    count     = register (0 :: Index n) (mux delivered (nextIndex <$> count) count)
    full      = register False (nextFull <$> full <*> accepted <*> finished)
    accepted  = (not <$> full) .&&. inputValid
    delivered = full .&&. readyOut
    finished  = delivered .&&. ((== maxBound) <$> count)

nextFull :: Bool -> Bool -> Bool -> Bool
nextFull full accepted finished = accepted || (full && not finished)
