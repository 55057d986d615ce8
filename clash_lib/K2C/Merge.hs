{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Exact element-wise arithmetic of the Keras merge layers (@Add@, @Subtract@,
@Multiply@, @Maximum@, @Minimum@, @Average@), for two 'SFixed' operands of
possibly different formats. Generated code applies them per element inside
a 'K2C.Stream.mapS' after a 'K2C.Branch.branches' join, then rounds each
result with 'K2C.Activation.requantize' (round to nearest, ties toward
+infinity, then saturate) and applies the activation, e.g.

> mapS (\(x0, (x1, x2)) -> zipWith3 (\a b c -> relu (requantize (addExact a (addExact b c)))) x0 x1 x2)

= Arithmetic

Every function here is exact: its result type holds every possible result,
so nothing wraps, saturates or rounds before the final 'requantize'. All
work is done on the raw 'Signed' integers (no 'resizeF', whose Clash 1.6.4
version wraps in some conversions; docs/architecture/hardware.md, "Clash 1.6.4 notes").

* @addExact@, @subExact@: both operands are aligned to
  @SFixed (1 + Max i1 i2) (Max f1 f2)@ (sign extension and a left shift, both
  exact), then added. The extra integer bit holds any sum or difference.
  These are the types of Clash's own @add@ / @sub@ ('ExtendingNum') for
  'SFixed'; the test checks that those are exact too.
* @mulExact@: @SFixed (i1 + i2) (f1 + f2)@, the full product of the raw
  integers (Clash's @mul@ has the same type).
* @maxExact@, @minExact@: both widened exactly to
  @SFixed (Max i1 i2) (Max f1 f2)@, then compared.
* @average n s@, with @s@ the exact sum (raw integer @S@, @f@ fraction bits)
  of @n >= 2@ values: @floor (S * 2^fo / (n * 2^f) + 1/2)@, saturated to the
  output format @SFixed oi fo@, i.e. the raw result is
  @floor ((2 * S * 2^fo + n * 2^f) / (2 * n * 2^f))@ then clamped.
  When @n@ is a power of two, @2^k@, this is a binary-point move (the raw
  @S@ read with @f + k@ fraction bits is exactly @s / n@) followed by
  'requantize'. Otherwise it is an exact division by the constant
  @2 * n * 2^f@ ('div', i.e. floor) on a 'Signed' wide enough for the
  numerator, then 'requantize' (only saturation: the fraction already is @fo@).

= Hardware

All combinational. @addExact@ / @subExact@: one adder of
@1 + Max i1 i2 + Max f1 f2@ bits; @mulExact@: one multiplier; @maxExact@ /
@minExact@: one comparator and a multiplexer; @average@: wires (power of two)
or a divider by a constant of @i + f + fo + CLog 2 n + 3@ bits.
-}
module K2C.Merge
  ( addExact
  , subExact
  , mulExact
  , maxExact
  , minExact
  , average
  , widen
  ) where

import Clash.Prelude

import K2C.Activation (requantize)

-- | Exact widening to a format with at least as many integer and fraction
-- bits (@i <= oi@, @f <= fo@): sign extension, then a left shift by the extra
-- fraction bits. The precondition is not a constraint (the typelits plugins
-- cannot prove @i <= 1 + Max i j@): it is the caller's, here result formats
-- built from 'Max', in "K2C.Recurrent" a window format that holds the input's
-- and the state's (keras2clash.kinds.recurrent.window_format).
widen
  :: forall i f oi fo
   . (KnownNat i, KnownNat f, KnownNat oi, KnownNat fo)
  => SFixed i f -> SFixed oi fo
widen x = sf (SNat @fo) (shiftL (resize (unSF x)) (natToNum @fo - natToNum @f))

-- | Exact sum.
addExact
  :: forall i1 f1 i2 f2
   . (KnownNat i1, KnownNat f1, KnownNat i2, KnownNat f2)
  => SFixed i1 f1 -> SFixed i2 f2 -> SFixed (1 + Max i1 i2) (Max f1 f2)
addExact x y = sf SNat (unSF x' + unSF y')
  where
    x', y' :: SFixed (1 + Max i1 i2) (Max f1 f2)
    x' = widen x
    y' = widen y

-- | Exact difference, first minus second.
subExact
  :: forall i1 f1 i2 f2
   . (KnownNat i1, KnownNat f1, KnownNat i2, KnownNat f2)
  => SFixed i1 f1 -> SFixed i2 f2 -> SFixed (1 + Max i1 i2) (Max f1 f2)
subExact x y = sf SNat (unSF x' - unSF y')
  where
    x', y' :: SFixed (1 + Max i1 i2) (Max f1 f2)
    x' = widen x
    y' = widen y

-- | Exact product.
mulExact
  :: forall i1 f1 i2 f2
   . (KnownNat i1, KnownNat f1, KnownNat i2, KnownNat f2)
  => SFixed i1 f1 -> SFixed i2 f2 -> SFixed (i1 + i2) (f1 + f2)
mulExact x y = sf (SNat @(f1 + f2)) (mul (unSF x) (unSF y))

-- | The larger operand, exactly.
maxExact
  :: forall i1 f1 i2 f2
   . (KnownNat i1, KnownNat f1, KnownNat i2, KnownNat f2)
  => SFixed i1 f1 -> SFixed i2 f2 -> SFixed (Max i1 i2) (Max f1 f2)
maxExact x y = max (widen x) (widen y)

-- | The smaller operand, exactly.
minExact
  :: forall i1 f1 i2 f2
   . (KnownNat i1, KnownNat f1, KnownNat i2, KnownNat f2)
  => SFixed i1 f1 -> SFixed i2 f2 -> SFixed (Max i1 i2) (Max f1 f2)
minExact x y = min (widen x) (widen y)

-- | The rounded mean of @n@ values given their exact sum (see the module
-- header): @floor (s / n * 2^fo + 1/2)@ saturated to @SFixed oi fo@.
average
  :: forall n i f oi fo
   . (KnownNat n, 2 <= n, KnownNat i, KnownNat f, KnownNat oi, KnownNat fo)
  => SNat n -> SFixed i f -> SFixed oi fo
average SNat s
  | popCount count == 1 = requantize movedPoint
  | otherwise           = requantize quotient
  where
    count = natToInteger @n

    -- n = 2^k: the same raw integer with k more fraction bits is s / n.
    movedPoint :: SFixed i (f + CLog 2 n)
    movedPoint = sf SNat (resize (unSF s))

    -- Otherwise floor ((2 S 2^fo + n 2^f) / (2 n 2^f)), already in the
    -- output's fraction bits. |2 S 2^fo| <= 2^(i+f+fo) and n 2^f < 2^(CLog 2 n + f),
    -- so numerator and divisor fit in i + f + fo + CLog 2 n + 3 bits.
    numerator, divisor :: Signed (i + f + fo + CLog 2 n + 3)
    numerator = shiftL (resize (unSF s)) (1 + natToNum @fo) + fromInteger (shiftL count (natToNum @f))
    divisor   = fromInteger (shiftL (2 * count) (natToNum @f))
    quotient :: SFixed (i + f + CLog 2 n + 3) fo
    quotient  = sf SNat (numerator `div` divisor)
