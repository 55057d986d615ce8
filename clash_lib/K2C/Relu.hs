{-# LANGUAGE DataKinds, TypeFamilies, MonoLocalBinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=0 #-}
{-|
The exact piecewise activations (docs/guide/contract.md, "Activations", exact functions): the
ReLU family (Keras ReLU with threshold, max_value and negative_slope; relu6;
leaky_relu; PReLU, one slope per channel) and hard_sigmoid / hard_silu.

= Arithmetic

* 'reluFamily' on the raw input @r@ (format @SFixed ii fi@): if @r > tCmp@
  (@tCmp = floor(t * 2^fi)@, so the comparison is exactly @x > t@) the value
  is @x@ (clamped at 0 first when a cap is given, as Keras clips to
  @[0, max_value]@), rounded to the output ('requantize'), then capped at
  @cap@ (max_value rounded to the output: rounding is monotone, so capping
  after it is exact; Keras caps this side only); otherwise @k * (x - t)@: the slope @k@ in 16 fraction
  bits times @x - t@ (@t@ rounded to fi), exact, rounded half up once and
  saturated. A power-of-two slope is a shift.
* 'hardSigmoid': @v = clip(r + 3*2^fi, 0, 6*2^fi)@, the raw output
  @floor((2 v 2^fo + 6 2^fi) / (12 2^fi))@: @v / 6@ rounded half up, exactly
  (a division by a constant), saturated.
* 'hardSilu': @floor((2 r v 2^fo + 6 2^(2fi)) / (12 2^(2fi)))@, saturated:
  @x * relu6(x + 3) / 6@ rounded half up, exactly.

= Timing

Combinational, no state. 'reluProduct' and 'reluSelect' are 'reluFamily'
cut in two, for a register between them.
-}
module K2C.Relu
  ( reluFamily
  , reluProduct
  , reluSelect
  , ReluProduct
  , hardSigmoid
  , hardSilu
  ) where

import Clash.Prelude

import K2C.Activation (requantize)

-- | See the module header. @floor0@: clamp at 0 before the cap (a max_value is given).
reluFamily
  :: forall kb ii fi oi fo
   . (KnownNat kb, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => Signed (ii + fi + 2) -> Signed (ii + fi + 2) -> Bool -> Maybe (SFixed oi fo) -> SFixed kb 16
  -> SFixed ii fi -> SFixed oi fo
reluFamily tCmp tRaw floor0 cap k = reluSelect . reluProduct tCmp tRaw floor0 cap k

-- | 'reluFamily' up to its slope's product: whether @x > t@, the value that
-- side gives (rounded and capped), and the exact product @k * (x - t)@. With
-- 'reluSelect' after it, the two halves of a pipelined ReLU (a register
-- between them: "K2C.Pipe".'K2C.Pipe.mapP2') when the slope is a constant
-- multiplication, not a shift: its adders, the rounding's carry chain and the
-- saturation would be one path (mlp_tanh's LeakyReLU(0.1) on ECP5: 40 levels, 15.9 ns).
reluProduct
  :: forall kb ii fi oi fo
   . (KnownNat kb, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => Signed (ii + fi + 2) -> Signed (ii + fi + 2) -> Bool -> Maybe (SFixed oi fo) -> SFixed kb 16
  -> SFixed ii fi -> ReluProduct kb ii fi oi fo
reluProduct tCmp tRaw floor0 cap k x = (r > tCmp, maybe rounded (min rounded) cap, k `mul` below)
  where
    r = resize (unSF x) :: Signed (ii + fi + 2)
    below = sf (SNat @fi) (r - tRaw) :: SFixed (ii + 2) fi
    rounded = requantize (if floor0 then max 0 x else x)

-- | The rest of 'reluFamily': the side's value, or the product rounded half up
-- once and saturated.
reluSelect
  :: forall pi pf oi fo
   . (KnownNat pi, KnownNat pf, KnownNat oi, KnownNat fo)
  => (Bool, SFixed oi fo, SFixed pi pf) -> SFixed oi fo
reluSelect (above, value, product') = if above then value else requantize product'

-- | What 'reluProduct' hands 'reluSelect'.
type ReluProduct kb ii fi oi fo = (Bool, SFixed oi fo, SFixed (kb + (ii + 2)) (16 + fi))

-- | @relu6(x + 3) / 6@, the exact value rounded half up once; @w@ (a type
-- application) is the work width, enough for @2 v 2^fo + 6 2^fi@ and the input.
hardSigmoid
  :: forall w ii fi oi fo . (KnownNat w, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => SFixed ii fi -> SFixed oi fo
hardSigmoid x = saturateRaw ((2 * v * bit (natToNum @fo) + 6 * one) `div` (12 * one))
  where
    one = bit (natToNum @fi) :: Signed w
    v = max 0 (min (6 * one) (resize (unSF x) + 3 * one))

-- | @x * relu6(x + 3) / 6@, the exact value rounded half up once; @w@ the work
-- width, enough for @2 r v 2^fo + 6 2^(2 fi)@.
hardSilu
  :: forall w ii fi oi fo . (KnownNat w, KnownNat ii, KnownNat fi, KnownNat oi, KnownNat fo)
  => SFixed ii fi -> SFixed oi fo
hardSilu x = saturateRaw ((2 * r * v * bit (natToNum @fo) + 6 * one * one) `div` (12 * one * one))
  where
    one = bit (natToNum @fi) :: Signed w
    r = resize (unSF x)
    v = max 0 (min (6 * one) (r + 3 * one))

-- | A raw result saturated to the output format.
saturateRaw
  :: forall w oi fo . (KnownNat w, KnownNat oi, KnownNat fo)
  => Signed w -> SFixed oi fo
saturateRaw q
  | wide > resize hi = maxBound
  | wide < resize lo = minBound
  | otherwise        = sf (SNat @fo) (resize q)
  where
    wide = resize q :: Signed (w + oi + fo)
    hi = maxBound :: Signed (oi + fo)
    lo = minBound :: Signed (oi + fo)
